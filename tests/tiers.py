"""The test tiers, by path and by name: the one table ``tests/conftest.py`` marks tests from.

The fast tier (``./scripts/test.sh``) is every test not listed here. The lists come from measurement: a
test that takes over 15 s of a busy 2-core machine is in the slow tier unless it is its kind's only one.
"""

from __future__ import annotations

#: Every test in these files is in the slow tier: a subprocess killed at every phase, every example DAG run
#: twice with ``airflow dags test`` (one file per DAG, so that the two workers share them).
SLOW_PATHS = (
    "test_fk_crash.py",
    "test_multiway_crash.py",
    "test_windowed_crash.py",
    "airflow/test_dags_",
)
#: Real servers: Airflow's api-server, scheduler and triggerer; a Spark Connect server; a standalone cluster.
E2E_PATHS = ("e2e/",)
#: In-process Spark tests in the slow tier: the scenarios that run many refreshes (each over 15 s of a busy
#: 2-core machine). Each module keeps its quicker tests in the fast tier, and every kind keeps at least one.
SLOW_TESTS: dict[str, set[str]] = {
    "test_action_counts.py": {
        "test_a_refresh_loads_each_table_log_once_and_runs_no_describe",
        "test_a_small_foreign_key_refresh_runs_a_few_spark_actions",
        "test_a_small_global_table_catch_up_runs_a_few_spark_actions",
        "test_a_small_multiway_refresh_runs_a_few_spark_actions",
        "test_a_small_stream_table_join_refresh_runs_a_few_spark_actions",
        "test_a_small_windowed_stream_refresh_runs_a_few_spark_actions",
        "test_a_small_windowed_table_refresh_runs_a_few_spark_actions",
    },
    "airflow/test_sensor_trigger.py": {
        "test_the_goal_never_drifts_across_reschedules_and_is_new_on_the_next_try",
    },
    "test_audit.py": {
        "test_audit_foreign_key_join",
        "test_audit_global_table_and_outer_windowed_table",
        "test_audit_multiway_join_and_refused_kinds",
    },
    "test_changelog.py": {
        "test_out_of_order_events_and_deletes_across_refreshes",
    },
    "test_column_names.py": {
        "test_global_table_with_odd_names",
        "test_multiway_join_with_odd_names",
        "test_stream_table_join_with_odd_names",
        "test_windowed_stream_join_with_odd_names",
        "test_windowed_table_join_with_odd_names",
    },
    "test_docs.py": {
        "test_spec_reference_hook_fails_rather_than_rendering_nothing",
    },
    "test_fk_changelog.py": {
        "test_both_sides_changelogs",
        "test_changelog_left_joined_to_table_right",
    },
    "test_fk_lifecycle.py": {
        "test_concurrent_refresh_loses_cleanly_and_retry_is_exact",
        "test_spec_change_rebuilds_and_replaces_schema",
        "test_vacuumed_history_falls_back_to_full",
    },
    "test_fk_semantics.py": {
        "test_duplicate_keys_on_incremental_run",
    },
    "test_global_table.py": {
        "test_bootstrap_checkpoint_restore_and_noop",
        "test_unusable_checkpoint_rebuilds",
    },
    "test_internals.py": {
        "test_transaction_versions_read_from_the_log_match_deltalake",
    },
    "test_multiway.py": {
        "test_a_key_repeated_by_an_append_fails_the_refresh",
        "test_a_row_and_its_partner_change_in_one_refresh",
        "test_changelog_input_with_out_of_order_events",
        "test_composite_join_keys",
        "test_many_to_many_guard",
        "test_pkey_enforced_names_the_input_that_repeats_it",
        "test_pkey_repeated_by_an_update_or_beside_a_kept_row",
        "test_three_inputs_one_to_many_and_many_to_many",
        "test_two_inputs_and_four_inputs",
        "test_update_to_the_same_values_rewrites_nothing",
    },
    "test_noop_check.py": {
        "test_noop_only_when_no_input_moved",
    },
    "test_safety.py": {
        "test_another_owners_output_is_refused_before_anything_is_read",
        "test_backtick_in_an_input_column_name_is_quoted",
        "test_commit_history_holds_no_key_values",
        "test_map_and_struct_value_columns_work_across_refreshes",
        "test_optimize_and_properties_are_not_changes",
        "test_output_changed_by_others_rebuilds",
        "test_progress_beyond_the_scanned_history_still_commits",
        "test_the_same_owner_editing_its_spec_rebuilds_naming_what_changed",
        "test_variant_value_column_works_across_refreshes",
    },
    "test_self_join.py": {
        "test_late_and_expired_records",
        "test_windowed_join_of_a_table_with_itself_rewrites_unless_it_cannot",
    },
    "test_stream_join.py": {
        "test_batch_size_from_the_log_for_blind_appends_else_from_the_feed",
        "test_global_table_latch_expr_mapper_and_empty_table",
        "test_lookup_semantics_inner_and_left",
    },
    "test_watermarks.py": {
        "test_a_refresh_records_its_origin_and_row_counts_for_a_retry",
    },
    "test_windowed_stream.py": {
        "test_crash_between_state_and_output_commit_is_harmless",
        "test_an_input_that_is_not_append_only_is_refused",
        "test_inner_join_band_inclusive_and_expiry",
        "test_late_rows_respect_grace_or_emit_immediately",
        "test_left_join_pending_rows_close_across_refreshes",
        "test_negative_before_and_asymmetric_window",
        "test_outer_join_null_keys_and_right_unmatched",
        "test_spec_change_on_an_append_only_output_is_refused",
    },
    "test_windowed_table.py": {
        "test_shifted_self_join_errors_vs_a_week_earlier",
        "test_windowed_table_enriched_from_a_plain_table",
    },
    "test_write_path.py": {
        "test_a_commit_landing_during_the_refresh_fails_it_cleanly",
        "test_an_output_that_moved_before_the_commit_is_merged",
        "test_an_output_whose_properties_were_changed_is_merged",
        "test_incremental_refresh_is_one_update_commit_with_its_progress",
        "test_refreshes_compact_the_output_when_small_files_pile_up",
    },
}


def tier_of(path: str, name: str) -> str | None:
    """The tier of test ``name`` in ``path`` (relative to tests/): "slow", "e2e", or None for the fast one."""
    if path.startswith(E2E_PATHS):
        return "e2e"
    if path.startswith(SLOW_PATHS) or name in SLOW_TESTS.get(path, ()):
        return "slow"
    return None
