"""The Prefect tasks: thin wrappers that call the stage library (`foundry.*`), log to MLflow and carry
retries and caching on their decorators. One module per stage: `data` (with `data_parallel`, the map
steps of preparation as task runs on Dask), `training`, `evaluation`, `registry`, and `align` (alignment's own
data, evaluation beside the base, gate and registration). `pyfunc_model` is
not a task: it keeps the served model's old import path for versions registered before the move."""
