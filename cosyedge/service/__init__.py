"""The request path: the Service facade, the job queue, synthesis, streaming, lessons, history."""
