"""Campaign modules still to move into autoexp.campaign (settings, triggers, ti_states; issue 13)."""
