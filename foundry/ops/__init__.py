"""Operations on the machine Foundry runs on.

- `servers`: the local Prefect and MLflow servers `foundry up` starts, waits on and stops
- `doctor`: what `foundry doctor` checks (versions, backends answering, telemetry switches)
"""
