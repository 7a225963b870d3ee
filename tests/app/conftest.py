"""AppTest runs in this process: show full error details here (the served config hides them from browsers), so
a failing AppTest names the exception and its traceback."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def full_error_details_in_tests():
    from streamlit import config

    before = config.get_option("client.showErrorDetails")
    config.set_option("client.showErrorDetails", "full")
    yield
    config.set_option("client.showErrorDetails", before)
