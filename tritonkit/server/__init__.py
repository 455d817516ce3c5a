"""Running tritonserver: settings → argv (once), the embedded local runner, deployment state."""

from tritonkit.server.settings import ServerSettings, load_server_settings
from tritonkit.server.state import Deployment, load_deployment

__all__ = ["ServerSettings", "load_server_settings", "Deployment", "load_deployment"]
