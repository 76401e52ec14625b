"""Storage credentials from Airflow connections, so no secret is written in a DAG file or a spec.

One connection id (``storage_conn_id=`` on the operators, the hook, the sensor and the trigger) gives
both readers of a table their settings:

* ``deltalake`` storage options, for what reads Delta logs without a JVM (the noop check, the sensor, the
  triggerer, a cluster-mode result);
* Hadoop settings for Spark's S3A, GCS and ABFS file systems: ``spark.hadoop.*`` conf on spark-submit
  (masked in logs), session settings over Spark Connect.

Connection types, read as the Amazon, Google and Azure providers define them (those providers need not be
installed; with ``apache-airflow-providers-amazon`` installed, an AWS connection with ``role_arn`` or
``profile_name`` is resolved to temporary keys through it):

=========================  ===================================================================================
``aws``                    ``login``/``password`` (or extras ``aws_access_key_id``/``aws_secret_access_key``),
                           extras ``aws_session_token``, ``region_name``, ``endpoint_url`` (or
                           ``service_config.s3.endpoint_url``)
``google_cloud_platform``  extras ``key_path`` (a key file on every node) or ``keyfile_dict`` (the
                           key's JSON), ``project``
``wasb``, ``adls``         the storage account (``adls``: ``host``; ``wasb``: ``login``, or the account URL in
                           ``host``), then extra ``connection_string``; or ``tenant_id`` with ``login``/
                           ``password`` as a service principal's client id and secret; or extra ``sas_token``;
                           or the account key (``password``, extras ``account_key``, ``shared_access_key``)
=========================  ===================================================================================

    >>> creds = credentials_from_connection(Connection(conn_type="aws", login="AKIA...", password="wJal...",
    ...                                                extra={"region_name": "eu-west-1"}))
    >>> creds.storage_options
    {'AWS_ACCESS_KEY_ID': 'AKIA...', 'AWS_SECRET_ACCESS_KEY': 'wJal...', 'AWS_REGION': 'eu-west-1'}
    >>> creds.spark_conf()["spark.hadoop.fs.s3a.endpoint.region"]
    'eu-west-1'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

AWS_TYPES = frozenset({"aws"})
GOOGLE_TYPES = frozenset({"google_cloud_platform", "gcpbigquery"})
AZURE_TYPES = frozenset({"wasb", "adls"})
SUPPORTED_TYPES = tuple(sorted(AWS_TYPES | GOOGLE_TYPES | AZURE_TYPES))
_TEMPORARY_AWS_PROVIDER = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


class CredentialsError(ValueError):
    """A connection that cannot give storage credentials: the message names it and what to change."""


@dataclass(frozen=True)
class StorageCredentials:
    """Credentials for one store: ``deltalake`` storage options and Hadoop settings (no ``spark.hadoop.``
    prefix; :meth:`spark_conf` adds it)."""

    storage_options: dict[str, str] = field(default_factory=dict)
    hadoop_conf: dict[str, str] = field(default_factory=dict)

    def spark_conf(self) -> dict[str, str]:
        """The Hadoop settings as Spark conf for spark-submit: ``spark.hadoop.<key>``."""
        return {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf.items()}


def _extra(extra: Mapping[str, Any], name: str, conn_type: str) -> Any:
    """An extra field by its name or the legacy ``extra__<conn_type>__<name>`` form."""
    value = extra.get(name)
    return value if value not in (None, "") else extra.get(f"extra__{conn_type}__{name}") or None


def credentials_from_connection(connection: Any) -> StorageCredentials:
    """The storage credentials a connection holds (pure: reads ``conn_type``, ``login``, ``password``,
    ``host`` and ``extra_dejson``); raises :class:`CredentialsError` for another connection type."""
    conn_type = str(connection.conn_type or "")
    extra = dict(connection.extra_dejson or {})
    if conn_type in AWS_TYPES:
        return _aws(connection, extra)
    if conn_type in GOOGLE_TYPES:
        return _google(extra, conn_type)
    if conn_type in AZURE_TYPES:
        return _azure(connection, extra, conn_type)
    raise CredentialsError(
        f"connection {connection.conn_id!r} is of type {conn_type!r}; storage credentials come from a "
        f"connection of type {', '.join(SUPPORTED_TYPES)}"
    )


def aws_credentials(
    access_key: str,
    secret_key: str,
    *,
    session_token: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
) -> StorageCredentials:
    """S3 credentials for ``deltalake`` and S3A; a session token selects S3A's temporary-credentials
    provider, and an endpoint (MinIO, LocalStack...) path-style access (and plain HTTP when it says so)."""
    options = {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    hadoop = {"fs.s3a.access.key": access_key, "fs.s3a.secret.key": secret_key}
    if session_token:
        options["AWS_SESSION_TOKEN"] = session_token
        hadoop["fs.s3a.session.token"] = session_token
        hadoop["fs.s3a.aws.credentials.provider"] = _TEMPORARY_AWS_PROVIDER
    if region:
        options["AWS_REGION"] = region
        hadoop["fs.s3a.endpoint.region"] = region
    if endpoint_url:
        options["AWS_ENDPOINT_URL"] = endpoint_url
        hadoop["fs.s3a.endpoint"] = endpoint_url
        hadoop["fs.s3a.path.style.access"] = "true"
        if endpoint_url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
            hadoop["fs.s3a.connection.ssl.enabled"] = "false"
    return StorageCredentials(options, hadoop)


def _aws(connection: Any, extra: Mapping[str, Any]) -> StorageCredentials:
    access_key = connection.login or extra.get("aws_access_key_id")
    secret_key = connection.password or extra.get("aws_secret_access_key")
    service = (extra.get("service_config") or {}).get("s3") or {}
    endpoint = service.get("endpoint_url") or extra.get("endpoint_url")
    if not access_key or not secret_key:
        raise CredentialsError(
            f"AWS connection {connection.conn_id!r} has no access key: give login (access key id) and "
            "password (secret access key), or install apache-airflow-providers-amazon to resolve role_arn, "
            "profile_name or the instance's role"
        )
    return aws_credentials(
        str(access_key),
        str(secret_key),
        session_token=extra.get("aws_session_token"),
        region=extra.get("region_name"),
        endpoint_url=endpoint,
    )


def _google(extra: Mapping[str, Any], conn_type: str) -> StorageCredentials:
    key_path = _extra(extra, "key_path", conn_type)
    keyfile = _extra(extra, "keyfile_dict", conn_type)
    project = _extra(extra, "project", conn_type)
    hadoop: dict[str, str] = {"fs.gs.project.id": str(project)} if project else {}
    if key_path:
        hadoop |= {
            "fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE",
            "fs.gs.auth.service.account.json.keyfile": str(key_path),
            "google.cloud.auth.service.account.json.keyfile": str(key_path),
        }
        return StorageCredentials({"google_service_account_path": str(key_path)}, hadoop)
    if keyfile:
        key = json.loads(keyfile) if isinstance(keyfile, str) else dict(keyfile)
        hadoop |= {
            "google.cloud.auth.service.account.enable": "true",
            "fs.gs.auth.service.account.email": str(key.get("client_email", "")),
            "fs.gs.auth.service.account.private.key.id": str(key.get("private_key_id", "")),
            "fs.gs.auth.service.account.private.key": str(key.get("private_key", "")),
        }
        return StorageCredentials({"google_service_account_key": json.dumps(key)}, hadoop)
    raise CredentialsError(
        "Google Cloud connection: give extra key_path (a service account key file present on every node) "
        "or keyfile_dict (the key's JSON)"
    )


def _azure_account(connection: Any, extra: Mapping[str, Any], conn_type: str) -> str | None:
    if conn_type == "adls":
        return connection.host or None
    host = str(connection.host or "")
    if "://" in host:  # wasb: the account URL, https://<account>.blob.core.windows.net
        return host.split("://", 1)[1].split(".", 1)[0] or None
    if _extra(extra, "tenant_id", conn_type):
        return None  # with a service principal, login is its client id
    return connection.login or None


def _azure(connection: Any, extra: Mapping[str, Any], conn_type: str) -> StorageCredentials:
    parts: dict[str, str] = {}
    connection_string = _extra(extra, "connection_string", conn_type)
    if connection_string:
        for item in str(connection_string).split(";"):
            name, _, value = item.partition("=")
            parts[name.strip()] = value.strip()
    account = parts.get("AccountName") or _azure_account(connection, extra, conn_type)
    if not account:
        raise CredentialsError(
            f"Azure connection {connection.conn_id!r}: no storage account; give it in host (adls: the "
            "account name; wasb: https://<account>.blob.core.windows.net) or login (wasb)"
        )
    host = f"{account}.dfs.core.windows.net"
    options = {"azure_storage_account_name": account}
    tenant = _extra(extra, "tenant_id", conn_type)
    sas = parts.get("SharedAccessSignature") or _extra(extra, "sas_token", conn_type)
    key = (
        parts.get("AccountKey")
        or _extra(extra, "account_key", conn_type)
        or _extra(extra, "shared_access_key", conn_type)
        or (connection.password if not tenant else None)
    )
    if tenant and connection.login and connection.password:
        return StorageCredentials(
            options
            | {
                "azure_client_id": connection.login,
                "azure_client_secret": connection.password,
                "azure_tenant_id": str(tenant),
            },
            {
                f"fs.azure.account.auth.type.{host}": "OAuth",
                f"fs.azure.account.oauth.provider.type.{host}": (
                    "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider"
                ),
                f"fs.azure.account.oauth2.client.id.{host}": connection.login,
                f"fs.azure.account.oauth2.client.secret.{host}": connection.password,
                f"fs.azure.account.oauth2.client.endpoint.{host}": (
                    f"https://login.microsoftonline.com/{tenant}/oauth2/token"
                ),
            },
        )
    if sas:
        token = str(sas).split("?", 1)[-1]
        return StorageCredentials(
            options | {"azure_storage_sas_token": token},
            {
                f"fs.azure.account.auth.type.{host}": "SAS",
                f"fs.azure.sas.token.provider.type.{host}": (
                    "org.apache.hadoop.fs.azurebfs.sas.FixedSASTokenProvider"
                ),
                f"fs.azure.sas.fixed.token.{host}": token,
            },
        )
    if key:
        return StorageCredentials(
            options | {"azure_storage_account_key": str(key)}, {f"fs.azure.account.key.{host}": str(key)}
        )
    raise CredentialsError(
        f"Azure connection {connection.conn_id!r}: no credentials; give the account key (password), extra "
        "sas_token, extra connection_string, or a service principal (extra tenant_id, login, password)"
    )


def storage_credentials(conn_id: str) -> StorageCredentials:
    """The storage credentials of Airflow connection ``conn_id`` (read at run time, never at parse time).

    An AWS connection without static keys is resolved through the Amazon provider when it is installed
    (roles, profiles, the instance's credentials), into temporary keys.
    """
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    extra = dict(connection.extra_dejson or {})
    has_keys = connection.login or extra.get("aws_access_key_id")
    if connection.conn_type in AWS_TYPES and not has_keys:
        try:
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
        except ImportError:
            return credentials_from_connection(connection)  # raises, saying what to give
        hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
        resolved = hook.get_credentials()
        service = (extra.get("service_config") or {}).get("s3") or {}
        return aws_credentials(
            resolved.access_key,
            resolved.secret_key,
            session_token=resolved.token,
            region=hook.conn_config.region_name,
            endpoint_url=service.get("endpoint_url") or extra.get("endpoint_url"),
        )
    return credentials_from_connection(connection)


def resolve_storage_options(
    storage_options: Mapping[str, str] | None, storage_conn_id: str | None
) -> dict[str, str] | None:
    """``deltalake`` storage options: the connection's, with explicit ``storage_options`` winning."""
    merged: dict[str, str] = {}
    if storage_conn_id:
        merged |= storage_credentials(storage_conn_id).storage_options
    merged |= dict(storage_options or {})
    return merged or None
