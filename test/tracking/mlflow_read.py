"""Reads an MLflow experiment's runs back with MLflow's own Python client, as JSON on standard output.

    python mlflow_read.py TRACKING_URI EXPERIMENT_NAME

Runs under the MLflow venv's Python (scripts/bootstrap.sh --print-mlflow-venv): mlflow_test.py calls it. Prints
{"runs": [{"run_id", "status", "params", "tags", "metrics": {key: [[step, value, timestamp], ...]}}, ...]}, the
runs oldest first; {"runs": null} when the experiment does not exist.
"""
import json
import sys

from mlflow.tracking import MlflowClient


def main():
    uri, name = sys.argv[1], sys.argv[2]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        print(json.dumps({"runs": None}))
        return
    runs = []
    for run in client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"]):
        metrics = {}
        for key in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, key)
            metrics[key] = sorted([m.step, m.value, m.timestamp] for m in history)
        runs.append({
            "run_id": run.info.run_id,
            "status": run.info.status,
            "params": run.data.params,
            "tags": run.data.tags,
            "metrics": metrics,
        })
    print(json.dumps({"runs": runs, "experiment_tags": experiment.tags}))


if __name__ == "__main__":
    main()
