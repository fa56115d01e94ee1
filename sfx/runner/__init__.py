"""``python -m sfx.runner.run``: the runner's entry point under the sfx name (the code is in sfx_runner)."""
