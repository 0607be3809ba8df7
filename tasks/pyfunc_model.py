"""The old import path of the served model's class, for versions registered before it moved.

Those versions pickled a reference to `tasks.pyfunc_model.GPTTextGenerator` and carry no code of
their own, so they load only inside a Foundry checkout; versions registered since carry their code
(`foundry/serving/pyfunc_model.py`) and load anywhere.
"""

from foundry.serving.pyfunc_model import GPTTextGenerator

__all__ = ["GPTTextGenerator"]
