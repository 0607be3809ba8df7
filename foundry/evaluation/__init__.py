"""Stage E, validation: holdout metrics and baselines (`metrics`), what people look at (`report`)."""
