"""Tests of the campaign UI plugin (autoexp.campaign.ui)."""
