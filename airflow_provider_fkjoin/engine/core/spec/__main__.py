"""Print the spec's JSON Schema, for an editor's YAML language server::

python -m airflow_provider_fkjoin.engine.core.spec > spec.schema.json
"""

from .schema import spec_json_schema_text

print(spec_json_schema_text(), end="")
