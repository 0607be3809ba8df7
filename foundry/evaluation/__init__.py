"""Stage E, validation: what a model scores on its holdout.

- `metrics`: holdout loss, perplexity and bits per byte, with a unigram baseline
- `compressors`: gzip, xz, and the strongest general compressors (xz -9e, PPMd order 16) given the training text
- `holdout_metrics`: a model's holdout scores as one typed value, and the one place naming their MLflow keys
"""
