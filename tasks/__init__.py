"""The Prefect tasks: thin wrappers that call the stage library (`foundry.*`), log to MLflow and carry
retries and caching on their decorators. One module per stage: `data`, `training`, `evaluation`,
`registry`."""
