"""How a Foundry process runs: its environment, logs, progress, MLflow bookkeeping and who owns a run.

- `env`: where state lives and the switches that keep every library offline
- `logs`: each log line once, third-party loggers routed through the process's handlers
- `log_retention`: how long and how large `$FOUNDRY_HOME/logs/` may grow
- `progress`: progress as a small JSON file the orchestrator reads
- `periodic`: doing something every few seconds while a stage runs
- `arithmetic`: what decides a step's floating-point results on this machine; `cpu_features`: its bf16 support
- `tracking`: MLflow bookkeeping: the experiment, the pipeline run, its lineage
- `run_owner`: which process owns a pipeline run, so a run whose process died is marked FAILED
- `preemption`: SIGTERM ends training at its next step with a checkpoint, within `train.preempt_grace_s`
- `deployment_policy`: what a run started from a deployment may point at: the operator's allow-lists
"""
