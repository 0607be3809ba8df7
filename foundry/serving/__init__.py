"""The registered model's own code: `pyfunc_model.py` travels with every version (models-from-code)."""
