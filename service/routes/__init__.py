"""The HTTP routers: thin, they parse and authenticate, then call `service.plan_service`."""
