print("server")
