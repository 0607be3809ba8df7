"""Stage C, the training loop (with B's warm starts), on one process or many. What it trains comes from the data's
workload (`foundry.core.workload`).

- `trainer`: build the model from config and train it with Lightning on hydrated shards
- `averaging`: the saved weights as the mean of the last steps' (`train.average_last`)
- `run`: what one training run reads and writes beside its config (`TrainingRun`)
- `sharding`: FSDP's strategy, also on CPU ranks, and BatchNorm's statistics under it
- `launch`: start the ranks: in this process for one, else under PyTorch's elastic agent
- `slurm`: the ranks as a SLURM job (`train.launcher: slurm`): infra/slurm/train.sbatch submitted, waited for
- `worker`: the entry point of one rank
- `failures`: what a failed multi-rank launch reports: the rank that failed first and its traceback
- `rank_logs`: the ranks' output, line by line, through this process's logging
- `stragglers`: each rank's pace in the run's metrics, and a warning naming a rank far slower than the rest
- `heartbeats`: which rank stopped answering when a collective timed out, named with its host
- `hosts`: where the ranks ran, the run's `train.hosts` tag
- `progress`: training progress: a bar on a terminal, a small file the orchestrator polls
- `plan`: `foundry plan`, memory per device and the largest micro-batch that fits
- `energy_plan`: `foundry plan`'s time and energy of a training before it runs, from its FLOPs and a power figure
- `cpu_peak`: a CPU's measured peak FLOP/s, for MFU
- `adapters`: LoRA's spec from the config, and the adapters written in PEFT's format
- `warm_start`: training that continues from a registered model (retrain, fine-tune, SFT and DPO)
"""
