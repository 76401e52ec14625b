"""An auth manager for the real-server tests' Airflow (``test_airflow_servers.py``): Airflow's simple auth
manager, except that the user ``viewer`` may not read the DAG named by ``FKJOIN_TEST_HIDDEN_DAG`` (the
simple manager alone lets a viewer read every DAG). Loaded by the api-server from ``[core] auth_manager``."""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class OneDagHiddenAuthManager(SimpleAuthManager):
    """Simple auth with one DAG hidden from ``viewer``."""

    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        hidden = os.environ.get("FKJOIN_TEST_HIDDEN_DAG")
        if user.get_name() == "viewer" and details is not None and details.id == hidden:
            return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
