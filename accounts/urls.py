from django.urls import path

from accounts import views

app_name = "accounts"
urlpatterns = [
    path("sign-in", views.sign_in, name="sign_in"),
    path("magic-link", views.magic_link_request, name="magic_link_request"),
    path("magic/<str:token>", views.magic_link_redeem, name="magic_link_redeem"),
    path("sign-out", views.sign_out, name="sign_out"),
    path("sign-out-everywhere", views.sign_out_everywhere, name="sign_out_everywhere"),
    path("time-zone", views.time_zone_set, name="time_zone"),
    path("passkeys", views.passkeys, name="passkeys"),
    path("passkeys/<int:passkey_id>/rename", views.passkey_rename, name="passkey_rename"),
    path("passkeys/<int:passkey_id>/delete", views.passkey_delete, name="passkey_delete"),
    path("passkeys/register/options", views.passkey_registration_options, name="passkey_register_options"),
    path("passkeys/register/verify", views.passkey_registration_verify, name="passkey_register_verify"),
    path("passkeys/authenticate/options", views.passkey_authentication_options, name="passkey_auth_options"),
    path("passkeys/authenticate/verify", views.passkey_authentication_verify, name="passkey_auth_verify"),
]
