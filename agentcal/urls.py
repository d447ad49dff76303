from django.urls import include, path

urlpatterns = [path("v1/", include("agentcal.api.urls"))]

# Unknown URLs and crashes answer in problem+json too: agents parse one error format.
handler404 = "agentcal.api.problems.api_not_found"
handler500 = "agentcal.api.problems.api_server_error"
