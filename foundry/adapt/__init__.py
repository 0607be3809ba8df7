"""Specialising a registered model (fine-tuning) and merging specialists by their parameters.

- `contracts`: the typed values of a merge: holdout scores, the gate's decision, the result
- `merging`: the specialists' common ancestor, the merged weights, the holdouts they are scored on
- `merge_gate`: the merge gate and the merged model's card
"""
