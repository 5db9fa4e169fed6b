"""The API's routes, one router a topic (FastAPI `APIRouter`s): jobs, schedules, uploads,
the status page's, and Prometheus's /metrics. Each calls the service (`service.orch.Orch`,
`service.views`, `service.schedule_rules`, `service.metrics_snapshot`) through the
scheduler's sessions; `deps` is what they share."""
