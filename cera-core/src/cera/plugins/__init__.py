"""Plugins: discovery through the ``cera`` entry-point group (`manager`), the hooks a plugin
implements (`hookspecs`), the declarations it registers (`registry`), install hints for
known names (`distributions`), registered-but-unimplemented backends (`placeholder`), and
time limits on plugin code (`timelimit`)."""
