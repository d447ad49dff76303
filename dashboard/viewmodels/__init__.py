"""Page view-models: what each page shows, built from the apps' selectors as plain data for its templates.
They neither parse requests nor render; views call them (docs/architecture.md, "The dashboard")."""
