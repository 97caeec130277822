"""Policy: resubmit or not, recovering a lost submission, whose cancel, hung or not, which error lines."""
