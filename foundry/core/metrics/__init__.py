"""What a model scored, as typed values every stage reads: the features that compute them and the gates, cards and
reports that show them import these, and these import no feature.

- `kinds`: the base every metrics type derives from and registers under by its `kind`, and the field type that takes
  any of them (`AnyMetrics`)
- `baselines`: what text and image holdout scores share (MLflow keys, baselines, the strongest, what is compared), and
  the field type that takes any of them (`AnyBaselined`)
- `holdout`: a language model's holdout loss, perplexity and bits per byte
- `aligned`: an aligned model's response loss, exact match and preference accuracy; `scores`: the gate's view of them
- `images`: an image classifier's accuracy, per-class figures and confusion matrix
"""
