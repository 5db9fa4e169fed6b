"""The API's routes, one router a topic (FastAPI `APIRouter`s): jobs, schedules, uploads,
and the status page's. Each calls the service (`service.orch.Orch`, `service.views`,
`service.schedule_rules`) through the scheduler's sessions; `deps` is what they share."""
