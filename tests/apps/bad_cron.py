from runner import Runner

app = Runner()


@app.job("nightly", cron="61 2 * * *")
def nightly(ctx):
    pass
