"""Pure core: specs, names, progress records, planning, errors. No pyspark, no deltalake: safe to import in
the scheduler, the triggerer and a DAG parse.
"""
