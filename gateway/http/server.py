"""The ASGI entry point for uvicorn: settings read once from the environment."""

from gateway.http.app import create_app
from gateway.settings import load_settings

app = create_app(load_settings())
