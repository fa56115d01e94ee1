"""An env whose first instance to reach step 300 hangs for good (as a stuck emulator would): the
rollout worker stops sending heartbeats and must be restarted. Imported by the training process
through SFX_EXTRA_ENV_MODULES; HANG_MARKER names the file that makes only one env hang."""

import os
import time

import gymnasium
import numpy as np

from sfx.envs import register_env


class HangingEnv(gymnasium.Env):
    def __init__(self):
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.steps += 1
        self.t += 1
        marker = os.environ.get("HANG_MARKER")
        if marker and self.steps == 300:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # only the first env to get here
                os.close(fd)
                while True:
                    time.sleep(1)
            except FileExistsError:
                pass
        return np.zeros(4, np.float32), float(action == 1), False, self.t >= 20, {}


def make_hanging_env(*args, **kwargs):
    return HangingEnv()


register_env("tst_hanging", make_hanging_env)
