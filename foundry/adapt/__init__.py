"""Specialising a registered model (fine-tuning) and merging specialists by their parameters."""
