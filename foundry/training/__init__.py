"""Stage C, the training loop: Lightning on one process or many (`trainer`, `launch`, `worker`), the
memory planner (`plan`), and warm starts from a registered model (`warm_start`)."""
