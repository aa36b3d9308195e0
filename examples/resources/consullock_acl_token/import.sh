# By accessor ID (never by the secret):
tofu import consullock_acl_token.nightly_report 6a1f4d2e-0b7c-4e3a-8f9d-1c2b3a4d5e6f
