# By profile name (the record <registry_prefix>/session-defaults/fast):
tofu import consullock_session_defaults.fast fast
