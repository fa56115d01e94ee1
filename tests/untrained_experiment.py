"""An experiment folder as training leaves it, without training: for the tests of the entry points that
read one (sfx.enjoy, sfx.export)."""

from pathlib import Path

from sfx.registries import parse_args
from sfx.envs import make_env
from sfx.experiment import cfg_to_dict, experiment_dir, save_cfg, save_checkpoint
from sfx.models import create_actor_critic


def write_untrained_experiment(train_dir: Path, env: str, experiment: str, *flags: str, checkpoint: bool = True,
                               train_step: int = 1, env_steps: int = 0) -> list[str]:
    """cfg.json and (``checkpoint``) one checkpoint of an untrained model (``--hidden_size=16 --seed=3`` and
    ``flags``) at ``train_step`` / ``env_steps``; returns ``--experiment`` and ``--train_dir`` pointing at it."""
    where = [f"--experiment={experiment}", f"--train_dir={train_dir}"]
    cfg = parse_args([f"--env={env}", *where, "--device=cpu", "--hidden_size=16", "--seed=3", *flags])
    experiment_dir(cfg).mkdir(parents=True, exist_ok=True)
    save_cfg(cfg)
    if checkpoint:
        probe = make_env(cfg)
        model = create_actor_critic(cfg, probe.observation_space, probe.action_space)
        probe.close()
        save_checkpoint(cfg, 0, {"model": model.state_dict(), "optimizer": {}, "train_step": train_step,
                                 "env_steps": env_steps, "policy_version": train_step, "cfg": cfg_to_dict(cfg)})
    return where
