"""Stage E, validation: what a model scores on its holdout.

- `metrics`: holdout loss, perplexity and bits per byte, with a unigram baseline
- `holdout_metrics`: a model's holdout scores as one typed value, and the one place naming their MLflow keys
"""
