# By policy name:
tofu import consullock_acl_policy.nightly_report nightly-report-holders

# Or by policy ID:
tofu import consullock_acl_policy.nightly_report 3f5e1b8c-6a3d-4f0e-9a4b-2c7d8e9f0a1b
