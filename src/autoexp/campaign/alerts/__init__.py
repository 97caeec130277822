"""What an alert of a failed campaign run says, and where it is sent."""
