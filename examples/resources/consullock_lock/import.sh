# By lock name (the record <registry_prefix>/locks/nightly-report):
tofu import consullock_lock.nightly_report nightly-report
