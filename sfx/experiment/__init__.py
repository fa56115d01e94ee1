"""The experiment folder: paths, cfg.json, checkpoints, logs."""

from sfx.experiment.cfg_io import cfg_to_dict, load_cfg, save_cfg, write_status
from sfx.experiment.checkpoints import (atomic_torch_save, best_checkpoint_path, checkpoint_name, list_checkpoints,
                                        load_checkpoint, load_latest_checkpoint, load_policy_checkpoint, prune_checkpoints,
                                        save_best_checkpoint,
                                        save_checkpoint, save_milestone)
from sfx.experiment.logs import remove_logging, setup_logging
from sfx.experiment.paths import (cfg_path, checkpoint_dir, done_path, experiment_dir, log_path, milestones_dir,
                                  pbt_dir, policy_cfg_path, status_path, summary_dir)

__all__ = ["atomic_torch_save", "best_checkpoint_path", "cfg_path", "cfg_to_dict", "checkpoint_dir", "checkpoint_name", "done_path",
           "experiment_dir", "list_checkpoints", "load_cfg", "load_checkpoint", "load_latest_checkpoint", "load_policy_checkpoint", "log_path",
           "milestones_dir", "pbt_dir", "policy_cfg_path", "prune_checkpoints", "remove_logging", "save_best_checkpoint", "save_cfg",
           "save_checkpoint", "save_milestone", "setup_logging", "status_path", "summary_dir", "write_status"]
