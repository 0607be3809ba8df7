-- Runs once, when the PostgreSQL volume is first created: the Prefect database is POSTGRES_DB,
-- MLflow gets its own database on the same server.
CREATE DATABASE mlflow;
