"""A start that an agent's checks refuse leaves no experiment folder behind (issue 57): the coordinator's
first lines wait for the folder its run makes after the checks."""

from sfx import train as train_module


def test_a_start_refused_by_the_agent_leaves_no_folder(tmp_path, capsys):
    # R2D2 acts on Discrete spaces only: it refuses Pendulum's Box actions once the env's spaces are known,
    # after logging is set up (the coordinator's first line names the experiment)
    rc = train_module.main(["--env=gym_Pendulum-v1", "--algo=R2D2", "--experiment=refused", f"--train_dir={tmp_path}",
                            "--serial_mode=True", "--num_workers=1", "--device=cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "sfx: error: --algo=R2D2 needs a Discrete action space" in err, err
    assert f"experiment {tmp_path / 'refused'}" in err  # the line was said, on the console
    assert not (tmp_path / "refused").exists()
