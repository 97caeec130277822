"""Before a campaign runs: the cluster preflight (`autoexp doctor`) and the staging of the cluster tools."""
