# The MLflow tracking server: the official image plus the PostgreSQL driver (backend store)
# and boto3 (artifacts in MinIO/S3). Same MLflow version as the client pinned in pyproject.toml.
ARG SERVER_VERSION=3.17.2
FROM ghcr.io/mlflow/mlflow:v${SERVER_VERSION}

RUN pip install --no-cache-dir psycopg2-binary==2.9.13 boto3==1.43.117
