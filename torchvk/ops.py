"""Drop-ins with torch's signatures that accept CPU or tvk tensors (filled in below)."""
