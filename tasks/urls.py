from django.urls import path

from tasks.api import cards, decisions, sessions, usage
from tasks.pushes import receive
from tasks.web import (
    agent_page,
    answer_links,
    checks,
    credentials_page,
    deliveries_page,
    held_answers,
    oauth_views,
    settings_page,
    slack_clicks,
    slack_link,
    usage_page,
    views,
)

urlpatterns = [
    path("", views.overview, name="overview"),
    path("healthz", views.healthz, name="healthz"),
    path("usage/", usage_page.usage_page, name="usage"),
    path("settings/", settings_page.settings_page, name="settings"),
    path(
        "settings/credentials/<int:agent_id>/",
        credentials_page.save_credential,
        name="credential-save",
    ),
    path(
        "settings/credentials/<int:agent_id>/remove/",
        credentials_page.remove_credential,
        name="credential-remove",
    ),
    path("oauth/<int:agent_id>/connect/", oauth_views.connect, name="oauth-connect"),
    path("oauth/callback/", oauth_views.callback, name="oauth-callback"),
    path("oauth/<int:agent_id>/disconnect/", oauth_views.disconnect, name="oauth-disconnect"),
    path("agents/<int:agent_id>/", agent_page.agent_page, name="agent"),
    path("agents/<int:agent_id>/refresh/", agent_page.refresh_agent, name="agent-refresh"),
    path("agents/<int:agent_id>/follow/", agent_page.follow_task, name="agent-follow"),
    path("sessions/<int:session_id>/", views.session_page, name="session"),
    path("sessions/<int:session_id>/card/", views.session_card, name="session-card"),
    path("sessions/<int:session_id>/activity/", views.session_activity, name="session-activity"),
    path(
        "sessions/<int:session_id>/transcript/<int:message_id>/",
        views.message_text,
        name="session-message-text",
    ),
    path(
        "sessions/<int:session_id>/transcript/<int:message_id>/files/<int:file_index>/",
        views.message_file,
        name="session-message-file",
    ),
    path(
        "sessions/<int:session_id>/artifacts/<int:artifact_id>/",
        views.artifact_text,
        name="session-artifact-text",
    ),
    path(
        "sessions/<int:session_id>/artifacts/<int:artifact_id>/parts/<int:index>/download/",
        views.artifact_download,
        name="session-artifact-download",
    ),
    path(
        "sessions/<int:session_id>/tasks/<int:task_pk>/deliveries/",
        deliveries_page.task_deliveries,
        name="task-deliveries",
    ),
    path("live/board/", views.live_board, name="live-board"),
    path("sessions/<int:session_id>/messages/", views.send_message, name="session-message"),
    path("sessions/<int:session_id>/cancel/", views.cancel_task, name="session-cancel"),
    path("sessions/new/", views.start_session, name="session-new"),
    path(
        "interactions/<int:interaction_id>/prompt/",
        views.question_text,
        name="interaction-prompt",
    ),
    path(
        "interactions/<int:interaction_id>/answer/",
        views.answer_interaction,
        name="answer-interaction",
    ),
    path(
        "interactions/<int:interaction_id>/undo/",
        held_answers.undo,
        name="undo-answer",
    ),
    path("interactions/answer-many/", held_answers.answer_many, name="answer-many"),
    path(
        "interactions/<int:interaction_id>/dismiss/",
        views.dismiss_interaction,
        name="dismiss-interaction",
    ),
    path(
        "interactions/<int:interaction_id>/check/",
        checks.mark_checked,
        name="check-interaction",
    ),
    path("answer/<str:token>/", answer_links.answer_link, name="answer-link"),
    path(
        "slack/<int:channel_id>/interactions",
        slack_clicks.interactions,
        name="slack-interactions",
    ),
    path("slack/link/<str:token>/", slack_link.link_member, name="slack-link"),
    path("api/decisions", decisions.decisions, name="api-decisions"),
    path("api/decisions/summary", decisions.summary, name="api-decisions-summary"),
    path("a2a/push/<str:endpoint_id>/", receive.receive_push, name="push"),
    path("api/sessions", sessions.sessions, name="api-sessions"),
    path("api/sessions/<int:session_id>", sessions.session_detail, name="api-session"),
    path("api/waiting", sessions.waiting, name="api-waiting"),
    path("api/usage", usage.usage_json, name="api-usage"),
    path("api/progress-card", cards.card, name="api-progress-card"),
]
