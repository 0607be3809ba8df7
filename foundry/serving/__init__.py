"""The registered model's own code, which travels with every version (models-from-code).

- `pyfunc_model`: the served model: prompts or chats in, generated text out
- `vision_pyfunc`: the served image classifier: images in, a label and each class's probability out
- `package`: logging it: code, weights, tokenizer, signature and requirements as one MLflow model
  (an image classifier's: `foundry.vision.package`)
- `requirements.txt`: the requirements every version logs
- `http`: not the model's code (it stays here): `foundry serve-model`'s app, MLflow's scoring routes and OpenAI's
- `operations`: not the model's code either: that app's batching of many clients' requests, `/metrics` and `/health`
"""
