"""The site's own templates (admin branding, error pages) live in the top-level templates/; the
app's stay in queue_app/templates, which its wheel carries."""

from django.template.loader import get_template

from tests.helpers import PROJECT_ROOT


def test_the_admin_branding_is_the_sites_not_the_apps():
    origin = get_template("admin/base_site.html").origin.name
    assert origin == str(PROJECT_ROOT / "templates" / "admin" / "base_site.html")
    assert not (PROJECT_ROOT / "queue_app" / "templates" / "admin" / "base_site.html").exists()


def test_a_page_that_does_not_exist_is_the_sites_404(client, settings):
    settings.DEBUG = False
    response = client.get("/no-such-page/", HTTP_HOST="localhost")
    assert response.status_code == 404
    assert "<title>Not found | Job queue</title>" in response.content.decode()
