from runner import Runner

app = Runner()


@app.job("hello", every="1s")
def hello(ctx):
    pass
