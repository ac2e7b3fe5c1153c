"""The adapters people reach the box through: the Gradio page, REST + OpenAI routes, credentials."""
