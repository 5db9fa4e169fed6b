"""`orch serve`: the scheduler, the REST API and the status page, in one process.

Importing this package is cheap; FastAPI and uvicorn are imported by `app` and `run` only.
"""
