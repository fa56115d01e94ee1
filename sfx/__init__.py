"""sfx: asynchronous APPO / V-trace reinforcement learning at the highest throughput one machine gives.

The Python API (the command lines' flags, defaults and validation, for notebooks and scripts)::

    import sfx
    result = sfx.train(env="gym_CartPole-v1", experiment="cartpole", train_for_env_steps=100_000)
    scores = sfx.evaluate(env="gym_CartPole-v1", experiment="cartpole", max_num_episodes=10)

Both load torch on first use only (``import sfx`` stays light).
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "train":
        import importlib

        # the module sfx.train is callable (its __call__ is sfx.train.train), and stays `python -m sfx.train`
        return importlib.import_module("sfx.train")
    if name == "evaluate":
        from sfx.enjoy import evaluate

        return evaluate
    raise AttributeError(f"module 'sfx' has no attribute {name!r}")
