from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tasks", "0006_json_read_safely"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="allow_other_rpc_origin",
            field=models.BooleanField(
                default=False, verbose_name="JSON-RPC URL may be at another origin than the card"
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="refused_rpc_url",
            field=models.CharField(blank=True, max_length=500, verbose_name="refused JSON-RPC URL"),
        ),
        migrations.AddField(
            model_name="agent",
            name="refused_rpc_url_at",
            field=models.DateTimeField(
                blank=True, null=True, verbose_name="JSON-RPC URL refused at"
            ),
        ),
    ]
