"""Crawlo's ``crawlo.settings``: :class:`~.setting_manager.SettingManager`."""
