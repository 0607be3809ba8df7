"""Stage E, the registry: versions and aliases (`versions`), the promotion gate (`gate`), lineage
(`lineage`) and the registered model a run starts from (`parent`)."""
