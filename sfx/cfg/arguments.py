"""Every command-line flag of the trainer, with its default and help.

Names and defaults follow Sample Factory 1.x so that published command lines keep working.
Env families add their own flags through :func:`sfx.envs.registry.register_env_family`.
"""

from __future__ import annotations

import argparse
import os

from sfx.cfg.flag_types import add_bool_arg, device_flag, int_like
from sfx.cfg.sf1_compat import add_sf1_compat_args

# --train_for_env_steps' and --train_for_seconds' default: no limit
TRAIN_FOREVER = 10_000_000_000


def add_default_args(parser: argparse.ArgumentParser) -> None:
    """Add every flag the trainer itself understands (env families add theirs separately)."""
    _add_experiment_flags(parser)
    _add_sampling_flags(parser)
    _add_learning_flags(parser)
    _add_evaluation_flags(parser)
    _add_wandb_flags(parser)
    _add_pbt_flags(parser)
    _add_model_flags(parser)
    _add_stopping_flags(parser)
    add_sf1_compat_args(parser)


def _add_experiment_flags(parser: argparse.ArgumentParser) -> None:
    """The experiment flags."""
    g = parser.add_argument_group("experiment")
    g.add_argument("--algo", default="APPO",
                   help="learning algorithm, a registered agent: APPO (asynchronous PPO / V-trace), R2D2 "
                        "(recurrent replay distributed DQN), SAC (soft actor-critic), DUMMY_SAMPLER (no training: "
                        "random actions through the sampling path, as python -m sfx.dummy_sampler), or your own "
                        "(sfx.agents.register_agent); its flags join --help in a group of their own")
    g.add_argument("--env", required=True, help="env name: a family prefix and the env, e.g. gym_CartPole-v1")
    g.add_argument("--experiment", default="default_experiment",
                   help="experiment folder name under --train_dir; an existing one is resumed")
    g.add_argument("--train_dir", default="./train_dir", help="root folder of all experiments")
    g.add_argument("--device", type=device_flag, default="gpu", metavar="{gpu,cuda,cuda:N,cpu}",
                   help="where the learner and policy workers run: gpu (or cuda) = the GPU(s) CUDA shows, cuda:N = "
                        "GPU N alone (for this process and its workers), cpu. Left out: the GPU where CUDA is "
                        "available, else the CPU, silently; an explicit gpu / cuda on a machine without CUDA "
                        "says so and uses the CPU")
    g.add_argument("--seed", type=int, default=None,
                   help="seed for envs and torch; None = a different run every time")
    add_bool_arg(g, "serial_mode", False,
                 "run every component in one process, round-robin (debugging, bit-for-bit determinism; also the "
                 "fastest layout when sampling is a small share of the work, e.g. SAC on one env: nothing "
                 "preempts the learner's threads)")


def _add_sampling_flags(parser: argparse.ArgumentParser) -> None:
    """The sampling flags."""
    g = parser.add_argument_group("sampling")
    g.add_argument("--num_workers", type=int, default=os.cpu_count() or 1,
                   help="rollout worker processes; defaults to the number of CPU cores")
    g.add_argument("--num_envs_per_worker", type=int, default=2, help="envs each rollout worker steps")
    g.add_argument("--worker_num_splits", type=int, default=2,
                   help="groups each worker's envs are split into (double buffering: one group steps while the "
                        "other waits for actions); must divide --num_envs_per_worker")
    g.add_argument("--policy_workers_per_policy", type=int, default=1,
                   help="inference processes per policy (--inference=workers)")
    g.add_argument("--inference", default="workers", choices=["workers", "learner"],
                   help="where the acting forward passes run: workers = --policy_workers_per_policy policy worker "
                        "processes per policy, which read the learner's published weights; learner = SEED RL's "
                        "central inference: a thread of each learner's process, on its device, acting with the "
                        "weights it trains (no publication through shared memory). Default workers: the two measured "
                        "equal on a CPU and on a GPU (docs/appendix/agents_flag_notes.md)")
    add_bool_arg(g, "inference_cuda_graphs", True,
                 "on a CUDA device, acting forward passes are replayed from CUDA graphs (one per batch-size "
                 "bucket, batches padded up to it; captured at first use). On by default: launching a few hundred "
                 "small kernels from Python is most of a forward pass's time on a GPU. Same outputs as eager; models "
                 "with a memory (TrXL) or per-task outputs (PopArt), and any whose forward pass cannot be captured, "
                 "act eagerly. No effect on the CPU")
    g.add_argument("--inference_gather", default="host", choices=["host", "device"],
                   help="on a CUDA device, how a policy worker gathers a batch's observations and recurrent states "
                        "from the shared trajectory slots: host = index_select on the CPU into page-locked buffers, "
                        "then an asynchronous copy; device = the slots' memory is registered with CUDA in each policy "
                        "worker (page-locked in place, mapped) and the GPU reads the rows itself, so the worker's "
                        "process neither gathers nor copies them (falls back to host, logged, where registration or "
                        "its check fails). Default host: device measured no faster beyond the machine's drift "
                        "(docs/appendix/agents_flag_notes.md). No effect on the CPU")
    g.add_argument("--num_policies", type=int, default=1, help="policies trained together (agents map to policies)")
    g.add_argument("--rollout", type=int, default=32, help="trajectory length in agent steps sent to the learner")
    g.add_argument("--env_frameskip", type=int, default=1,
                   help="frames per agent step; env_steps are counted in frames (samples * env_frameskip)")
    g.add_argument("--traj_buffers_excess_ratio", type=float, default=2.0,
                   help="trajectory buffer slots allocated per slot strictly needed (room for the learner to lag)")
    g.add_argument("--batches_ahead", type=int, default=-1,
                   help="rollout workers start new trajectories only while those started and not yet taken by a "
                        "learner are fewer than one per agent (every agent keeps stepping) plus this many learner "
                        "batches: with 1 the next batch is collected while the learner trains on one (policy lag "
                        "~1 when the learner sets the pace), and a learner waiting for data never finds the envs "
                        "held; 0 = only the trajectory slots bound sampling (lag up to slots / batch); -1 = the "
                        "algorithm's choice (APPO: 1; SAC, R2D2: 0, their replay ratio paces sampling). Not used by "
                        "--serial_mode")
    add_bool_arg(g, "set_workers_cpu_affinity", True, "pin each rollout worker to one CPU core")
    g.add_argument("--learner_main_loop_num_cores", type=int, default=0,
                   help="torch threads of each learner process; 0 = auto: on the CPU every core for an agent whose "
                        "learner sets the pace (SAC: sampling waits on --replay_ratio), the cores --num_workers "
                        "leaves free (at least 1) for an image model, else 1")
    g.add_argument("--heartbeat_timeout_sec", type=float, default=120.0,
                   help="a rollout or policy worker silent this long (hung env, deadlock) gets its stacks dumped into "
                        "sf_log.txt and is restarted")
    g.add_argument("--distributed_timeout_sec", type=float, default=300.0,
                   help="with several ranks (torchrun, srun): a collective of the learners that waits this long for "
                        "another rank (dead or hung) fails, and the run stops with rank 0's last checkpoint")
    g.add_argument("--reset_timeout_seconds", type=float, default=120.0,
                   help="a rollout or policy worker that has not made and reset its envs (its first heartbeat) "
                        "this long after it started is restarted like a hung one (at least 3 x "
                        "--heartbeat_timeout_sec; --decorrelate_experience_max_seconds is added)")
    g.add_argument("--decorrelate_experience_max_seconds", type=float, default=0.0,
                   help="each rollout worker waits a random time up to this before it resets its envs and starts, "
                        "so that episodes (and slow resets) of different workers do not run in lockstep and "
                        "learner batches do not come in bursts; 0 = all start at once")
    g.add_argument("--max_component_restarts", type=int, default=10,
                   help="restarts allowed per rollout / policy worker (after a crash, a kill or a hang) before the "
                        "run stops; 0 = stop at the first failure")
    g.add_argument("--max_policy_lag", type=int, default=100,
                   help="samples collected more than this many policy versions ago are dropped")


def _add_learning_flags(parser: argparse.ArgumentParser) -> None:
    """The learning flags."""
    g = parser.add_argument_group("learning")
    g.add_argument("--batch_size", type=int, default=1024,
                   help="unit: samples (agent steps trained on) per minibatch, for every agent: whole trajectories "
                        "(a multiple of --rollout) for APPO and R2D2 (an R2D2 sequence's --burn_in prefix not "
                        "counted), transitions drawn one by one for SAC")
    g.add_argument("--recurrence", type=int, default=32,
                   help="BPTT length in steps; --rollout must be a multiple of it when --use_rnn")
    g.add_argument("--learning_rate", type=float, default=1e-4, help="Adam learning rate")
    g.add_argument("--lr_schedule", choices=["constant", "linear_decay", "kl_adaptive_minibatch", "kl_adaptive_epoch"],
                   default="constant",
                   help="how every learning rate of the agent changes over the run (Sample Factory 2's names): "
                        "constant; linear_decay (SEED RL's PPO, the RL Zoo's lin_): from its flag's value at env step "
                        "0 to --lr_decay_multiplier times it at --train_for_env_steps (which it needs), by env steps "
                        "trained, so a resumed run goes on at the rate it had (APPO, R2D2, SAC's three); "
                        "kl_adaptive_minibatch / kl_adaptive_epoch (APPO): divided by 1.5 after each minibatch (or "
                        "epoch) whose KL(behaviour || current) exceeds 2 x --lr_schedule_kl_threshold, multiplied by "
                        "1.5 below half of it. PBT mutates the flag's value and the schedule scales it")
    g.add_argument("--lr_decay_multiplier", type=float, default=0.0,
                   help="with --lr_schedule=linear_decay: the learning rate at --train_for_env_steps as a fraction of "
                        "the flag's, in [0, 1] (SEED RL's lr_decay_multiplier; 0 = to 0, as SEED, Sample Factory and "
                        "the RL Zoo)")
    g.add_argument("--adam_eps", type=float, default=1e-6, help="Adam epsilon")
    g.add_argument("--adam_beta1", type=float, default=0.9, help="Adam beta1")
    g.add_argument("--adam_beta2", type=float, default=0.999, help="Adam beta2")
    g.add_argument("--gamma", type=float, default=0.99, help="discount factor, in (0, 1]")
    g.add_argument("--max_grad_norm", type=float, default=4.0, help="gradient norm clip; <= 0 disables clipping")
    g.add_argument("--max_nan_batches", type=int, default=20,
                   help="minibatches in a row with NaN/inf (targets, loss or gradients) that are skipped before the "
                        "run stops with the last good weights saved")
    g.add_argument("--reward_scale", type=float, default=1.0, help="rewards are multiplied by this before clipping")
    g.add_argument("--reward_clip", type=float, default=10.0, help="scaled rewards are clipped to [-x, x]")


def _add_evaluation_flags(parser: argparse.ArgumentParser) -> None:
    """The evaluation during training flags."""
    g = parser.add_argument_group("evaluation during training")
    g.add_argument("--eval_every_env_steps", type=int_like, default=0,
                   help="every this many env steps (of a policy) an evaluator process plays --eval_episodes episodes "
                        "with the newest weights and logs eval/reward, eval/len; 0 = no evaluator. It never blocks "
                        "training: an evaluation due while one runs is skipped and counted (eval/skipped)")
    g.add_argument("--eval_episodes", type=int_like, default=10, help="episodes per evaluation")
    g.add_argument("--eval_env", default=None,
                   help="env to evaluate on (None = --env); any env of the same family with the same observation and "
                        "action spaces, e.g. a held-out level or scenario")
    g.add_argument("--eval_env_flags", default=None, metavar="'--FLAG=VALUE ...'",
                   help="env flags of the evaluator's envs only, over this run's: flags of the eval env's family, as "
                        "on a command line (--eval_env_flags='--procgen_num_levels=0' tests a policy trained on 200 "
                        "Procgen levels on the full distribution; --eval_env_flags=--atari_episodic_life=False plays "
                        "whole Atari games); checked at start against the family's own flags; None = the run's")
    add_bool_arg(g, "eval_deterministic", False, "evaluate with the most likely action (argmax) instead of sampling")
    g.add_argument("--eval_num_envs", type=int, default=2,
                   help="envs the evaluator steps (in its one process: its share of the CPU)")
    g.add_argument("--eval_video_every", type=int, default=0,
                   help="every this many evaluations (1 = each, the first included) also record the first episode of "
                        "the first eval env as an animated GIF in TensorBoard (eval/video, Images tab); 0 = no videos")
    g.add_argument("--eval_video_max_frames", type=int, default=300,
                   help="frames at most in an evaluation video (a longer episode is cut); frames are shrunk to "
                        "256 pixels on the long side")
    g.add_argument("--save_best_metric", choices=["none", "eval/reward"], default="none",
                   help="keep checkpoint_p{N}/best/best.pth: the weights with the highest value of this metric so far "
                        "(sfx.enjoy --load_checkpoint_kind=best plays them)")


def _add_wandb_flags(parser: argparse.ArgumentParser) -> None:
    """The Weights & Biases (--with_wandb) flags."""
    g = parser.add_argument_group("Weights & Biases (--with_wandb)")
    add_bool_arg(g, "with_wandb", False,
                 "log the TensorBoard scalars to Weights & Biases too (pip install wandb), as p{N}/<name> against "
                 "p{N}/env_steps, with the cfg as the run's config; the run id is kept in the experiment folder "
                 "(wandb_run_id.txt), so a resumed experiment continues the same W&B run")
    g.add_argument("--wandb_project", default="sfx", help="W&B project")
    g.add_argument("--wandb_user", default=None,
                   help="W&B entity (a user or team) the run belongs to; None = the logged-in user's default entity")
    g.add_argument("--wandb_group", default=None,
                   help="W&B group of the run (python -m sfx.runner.run sets it to the run's name); None = no group")
    g.add_argument("--wandb_tags", nargs="*", default=[], metavar="TAG",
                   help="W&B tags, separated by spaces or commas: --wandb_tags a b or --wandb_tags=a,b")
    g.add_argument("--wandb_mode", choices=["online", "offline", "disabled"], default=None,
                   help="W&B mode; None = W&B's own setting (WANDB_MODE, `wandb offline`; else online). offline "
                        "writes <experiment>/wandb/offline-run-*/ for a later `wandb sync`")


def _add_pbt_flags(parser: argparse.ArgumentParser) -> None:
    """The population-based training (--num_policies > 1) flags."""
    g = parser.add_argument_group("population-based training (--num_policies > 1)")
    add_bool_arg(g, "with_pbt", False,
                 "population-based training: weak policies copy strong ones (weights, optimizer, hyperparameters, "
                 "reward shaping) and hyperparameters are mutated")
    add_bool_arg(g, "pbt_mix_policies_in_one_env", True,
                 "agents of one multi-agent env may belong to different policies (self-play); False = one policy "
                 "per env, drawn per episode")
    g.add_argument("--pbt_period_env_steps", type=int_like, default=5_000_000,
                   help="env steps of a policy between its PBT steps (exploit and explore)")
    g.add_argument("--pbt_start_mutation", type=int_like, default=20_000_000,
                   help="env steps of a policy before its hyperparameters are first mutated or replaced")
    g.add_argument("--pbt_replace_fraction", type=float, default=0.3,
                   help="fraction of the population at the bottom (replaced) and the top (copied), in (0, 0.5]")
    g.add_argument("--pbt_mutation_rate", type=float, default=0.15,
                   help="probability that each hyperparameter is mutated at a PBT step, in [0, 1]")
    g.add_argument("--pbt_replace_reward_gap", type=float, default=0.1,
                   help="replace only if the better policy's objective exceeds ours by this fraction of its magnitude")
    g.add_argument("--pbt_replace_reward_gap_absolute", type=float, default=1e-6,
                   help="... and by at least this much")
    add_bool_arg(g, "pbt_optimize_batch_size", False,
                 "mutate --batch_size too (within 1/4x..2x of the start value, multiples of --rollout)")
    add_bool_arg(g, "pbt_optimize_gamma", False, "mutate --gamma too (perturbing 1 - gamma)")
    g.add_argument("--pbt_target_objective", default="true_reward",
                   help="episode statistic policies are ranked by (an env's episode_extra_stats key, or reward; "
                        "multi-task: suite/hns_mean, suite/hns_median or suite/hns_mean_capped); falls back to "
                        "reward for a policy whose episodes do not report it")
    g.add_argument("--pbt_perturb_min", type=float, default=1.05, help="smallest mutation factor (> 1)")
    g.add_argument("--pbt_perturb_max", type=float, default=1.5, help="largest mutation factor (>= pbt_perturb_min)")
    g.add_argument("--pbt_population_dir", default=None,
                   help="PBT across experiments: a folder shared by every member (e.g. on the cluster's shared "
                        "filesystem); each member publishes its objective and a snapshot there and copies better "
                        "members. None = PBT among the --num_policies of this run")
    g.add_argument("--pbt_member_name", default=None,
                   help="this experiment's name in --pbt_population_dir (default: --experiment)")
    g.add_argument("--pbt_member_stale_sec", type=float, default=3600.0,
                   help="members whose last publication is older than this are left out of the ranking "
                        "(crashed or waiting in a queue); they rejoin when they publish again")


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    """The model flags."""
    g = parser.add_argument_group("model")
    add_bool_arg(g, "use_rnn", True, "recurrent core after the encoder")
    # no argparse choices: names registered with sfx.models.register_core are valid too; validate_cfg
    # checks the name against sfx.cfg.core_names (torch-free) and lists the allowed ones
    g.add_argument("--rnn_type", default="gru",
                   help="recurrent core type (with --use_rnn): gru, lstm, trxl (Transformer-XL), or a custom core "
                        "registered with sfx.models.register_core")
    g.add_argument("--rnn_num_layers", type=int, default=1, help="recurrent core layers (gru, lstm)")
    # Transformer-XL (--rnn_type=trxl), named after Brain Agent's settings; its DMLab-30 agent used
    # --hidden_size=256 --mem_len=512 --n_layer=12 --n_heads=8 --d_head=64 --d_inner=2048 (on GPUs)
    g.add_argument("--mem_len", type=int, default=64,
                   help="trxl: steps of per-agent memory each step attends to (within its episode)")
    g.add_argument("--n_layer", type=int, default=2, help="trxl: transformer layers")
    g.add_argument("--n_heads", type=int, default=4, help="trxl: attention heads")
    g.add_argument("--d_head", type=int, default=64, help="trxl: width of each attention head")
    g.add_argument("--d_inner", type=int, default=1024, help="trxl: width of the position-wise feed-forward layer")
    g.add_argument("--trxl_dropout", type=float, default=0.0, help="trxl: dropout in attention and feed-forward")
    g.add_argument("--trxl_gate", choices=["none", "gru"], default="none",
                   help="trxl: none = TrXL-I residual connections (Brain Agent); gru = GTrXL's gates")
    add_bool_arg(g, "use_prev_action_reward", False,
                 "the core's input also gets the previous action (one-hot per action head) and the previous "
                 "reward clipped to [-1, 1] (Brain Agent's extended input); zeros at an episode start")
    g.add_argument("--hidden_size", type=int, default=512, help="width of the encoder output and the core")
    # no argparse choices: names registered with sfx.models.register_encoder are valid too; the
    # model registry rejects unknown ones with the list of allowed names before any worker starts
    g.add_argument("--encoder_type", default="conv",
                   help="encoder for image observations: conv, resnet, mlp or a registered custom encoder "
                        "(vector observations always use an MLP)")
    g.add_argument("--encoder_subtype", default="convnet_simple",
                   help="encoder architecture: convnet_simple, convnet_impala (conv), resnet_impala (resnet), "
                        "mlp_mujoco (mlp)")
    g.add_argument("--nonlinearity", choices=["elu", "relu", "tanh"], default="elu", help="activation function")
    initializations = ["orthogonal", "xavier_uniform", "kaiming_uniform", "torch_default"]  # models' INITIALIZATIONS
    g.add_argument("--policy_initialization", choices=initializations, default="orthogonal",
                   help="weight initialization of the built-in encoders' and the heads' layers (biases 0); "
                        "kaiming_uniform: PyTorch's own default weights; torch_default: leave PyTorch's init")
    g.add_argument("--encoder_initialization", choices=["policy", *initializations], default="policy",
                   help="the built-in encoders' own initialization; policy: --policy_initialization's. The doom "
                        "family's kaiming_uniform is the scale Sample Factory's encoders train from (its "
                        "orthogonal init skips its jit-scripted encoders)")
    g.add_argument("--policy_init_gain", type=float, default=1.0, help="gain of those initializations")
    g.add_argument("--obs_scale", type=float, default=255.0, help="image observations are divided by this")
    g.add_argument("--obs_subtract_mean", type=float, default=0.0,
                   help="subtracted from integer (e.g. uint8) image observations before --obs_scale divides them: "
                        "(x - obs_subtract_mean) / obs_scale; vector observations are left alone")
    g.add_argument("--mixed_precision", choices=["auto", "bf16", "off"], default="auto",
                   help="image encoders compute in bfloat16 (weights, core, heads and losses stay float32): "
                        "bf16, off, or auto = bf16 where the CPU/GPU has native bfloat16 (AVX512-BF16, AMX, "
                        "Ampere+), else off")
    add_bool_arg(g, "tf32", False,
                 "on a CUDA GPU with TensorFloat-32 (Ampere and later), float32 matrix products and convolutions "
                 "take TF32 inputs (10-bit mantissa, float32 accumulation: ~1e-3 relative error per product, "
                 "several times the float32 throughput); False = full float32 for both (PyTorch's own default "
                 "leaves convolutions in TF32). No effect on the CPU")
    add_bool_arg(g, "normalize_input", True, "normalize observations with running mean and std")


def _add_stopping_flags(parser: argparse.ArgumentParser) -> None:
    """The stopping, checkpoints and reporting flags."""
    g = parser.add_argument_group("stopping, checkpoints and reporting")
    g.add_argument("--train_for_env_steps", type=int_like, default=TRAIN_FOREVER,
                   help="stop after this many env steps (frames); 1e9 notation accepted")
    g.add_argument("--train_for_seconds", type=int_like, default=TRAIN_FOREVER, help="stop after this many seconds")
    g.add_argument("--stop_at_reward", type=float, default=None,
                   help="stop (as done) once a policy's average episode reward over its last --stats_avg "
                        "episodes reaches this; None = never")
    g.add_argument("--save_every_sec", type=float, default=120, help="checkpoint period in seconds")
    g.add_argument("--keep_checkpoints", type=int, default=3, help="newest checkpoints kept per policy")
    g.add_argument("--save_milestones_sec", type=int, default=-1,
                   help="copy a checkpoint into milestones/ this often (never pruned); -1 = never")
    g.add_argument("--experiment_summaries_interval", type=float, default=20,
                   help="seconds between TensorBoard summaries")
    g.add_argument("--report_every_sec", type=float, default=5.0, help="seconds between status lines in the log")
    g.add_argument("--stats_avg", type=int, default=100, help="episodes averaged for reported reward and length")


def add_eval_args(parser: argparse.ArgumentParser) -> None:
    """Flags of ``python -m sfx.enjoy`` (evaluate, render, record a video)."""
    g = parser.add_argument_group("evaluation")
    g.add_argument("--max_num_episodes", type=int_like, default=10, help="stop after this many episodes")
    g.add_argument("--max_num_frames", type=int_like, default=1_000_000_000, help="stop after this many frames")
    g.add_argument("--no_render", action="store_true", help="do not open a window")
    g.add_argument("--save_video", action="store_true", help="record the episodes to a video")
    g.add_argument("--video_name", default=None,
                   help="video file name inside the experiment folder (None = replay.mp4)")
    g.add_argument("--policy_index", type=int, default=0, help="which policy (of --num_policies) to evaluate")
    g.add_argument("--load_checkpoint_kind", choices=["latest", "best"], default="latest",
                   help="latest = the newest checkpoint; best = the one --save_best_metric kept")
    g.add_argument("--deterministic", action="store_true",
                   help="take the most likely action instead of sampling")
    g.add_argument("--fps", type=int, default=0, help="render at most this many frames per second; 0 = no limit")
