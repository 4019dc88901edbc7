"""Alertmanager -> WeCom / Feishu group-bot relay: receive, store in a durable outbox, deliver under rate limits."""
